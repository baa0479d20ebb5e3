"""Why bwrap does not work here, and what to do about it.

Called only after the real probe failed. It re-runs bwrap with one more
namespace at a time to find the first step that fails, then reads the kernel's
knobs and the signs of a surrounding container to name the cause. Every
finding comes with a concrete fix.
"""

from __future__ import annotations

import os
import subprocess

__all__ = ["Finding", "diagnose_bwrap", "read_sysctl"]

Finding = tuple[str, str]
"""``(why, fix)``."""

_TIMEOUT = 10.0


def read_sysctl(name: str) -> str | None:
    """The value of ``/proc/sys/<name>`` (dots become slashes), or None."""
    try:
        with open("/proc/sys/" + name.replace(".", "/"), encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def _container() -> str | None:
    """The kind of sandbox or container we run in, if any."""
    if os.path.exists("/.flatpak-info"):
        return "a Flatpak sandbox"
    if os.path.exists("/run/.containerenv"):
        return "a Podman container"
    if os.path.exists("/.dockerenv"):
        return "a Docker container"
    # systemd-nspawn, LXC and Podman set a lowercase `container` variable.
    kind = os.environ.get("container")  # noqa: SIM112
    if kind:
        return f"a {kind} container"
    try:
        with open("/proc/1/cgroup", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    for marker, kind in (("kubepods", "a Kubernetes pod"), ("docker", "a Docker container")):
        if marker in text:
            return kind
    return None


def _run(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return done.returncode == 0, done.stderr.decode("utf-8", "replace").strip()


def _userns_finding(stderr: str) -> Finding:
    if read_sysctl("kernel.unprivileged_userns_clone") == "0":
        return (
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)",
            "sudo sysctl -w kernel.unprivileged_userns_clone=1, and persist it in "
            "/etc/sysctl.d/90-userns.conf",
        )
    if read_sysctl("user.max_user_namespaces") == "0":
        return (
            "user namespaces are disabled (user.max_user_namespaces=0)",
            "sudo sysctl -w user.max_user_namespaces=15000, and persist it in /etc/sysctl.d/",
        )
    if read_sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        return (
            "AppArmor restricts unprivileged user namespaces "
            "(kernel.apparmor_restrict_unprivileged_userns=1)",
            "let bwrap use them: sudo apt install apparmor-profiles && sudo ln -s "
            "/usr/share/apparmor/extra-profiles/bwrap-userns-restrict /etc/apparmor.d/ && "
            "sudo apparmor_parser -r /etc/apparmor.d/bwrap-userns-restrict "
            "(or: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)",
        )
    container = _container()
    if container:
        return (
            f"corral runs inside {container}, which forbids creating namespaces ({stderr})",
            "run corral outside the container, or allow namespaces in it (e.g. docker run "
            "--security-opt seccomp=unconfined --security-opt apparmor=unconfined), "
            "or use --sandbox off",
        )
    return (
        f"bwrap cannot create a user namespace: {stderr}",
        "enable unprivileged user namespaces (sysctl user.max_user_namespaces, "
        "kernel.unprivileged_userns_clone) or check the security module's log (dmesg)",
    )


def diagnose_bwrap(bwrap: str, stderr: str, runtime: str) -> Finding:
    """Explain a failed bwrap probe.

    Args:
        bwrap: path of the bwrap binary.
        stderr: what the failed probe printed.
        runtime: the interpreter the probe ran inside the sandbox.

    Returns:
        ``(why, fix)``.
    """
    first = stderr.splitlines()[0] if stderr else "no error message"
    if "Unknown option" in stderr or "unrecognized option" in stderr:
        return (
            f"this bwrap is too old for corral's flags ({first})",
            "install bubblewrap 0.8 or newer",
        )
    ns = [bwrap, "--unshare-user"]
    root = ["--ro-bind", "/", "/"]
    stages: list[tuple[str, list[str]]] = [
        ("user namespace", [*ns, *root]),
        ("pid namespace", [*ns, "--unshare-pid", *root]),
        ("/proc", [*ns, "--unshare-pid", *root, "--proc", "/proc"]),
        ("network namespace", [*ns, "--unshare-net", *root]),
    ]
    for stage, argv in stages:
        ok, err = _run([*argv, "--", "/bin/true"])
        if ok:
            continue
        err_first = err.splitlines()[0] if err else first
        if stage == "user namespace":
            return _userns_finding(err_first)
        container = _container()
        where = f"inside {container}" if container else "in a sandbox or container"
        return (
            f"bwrap cannot set up a {stage} ({err_first}); corral seems to run {where} "
            "that forbids it (a nested sandbox)",
            "run corral outside the container or sandbox, give the container the right to "
            "create namespaces and mount /proc (e.g. docker run --security-opt "
            "seccomp=unconfined --security-opt systempaths=unconfined), or use --sandbox off",
        )
    return (
        f"the runtime {runtime} does not start inside the sandbox ({first})",
        f"make sure {runtime} and its installation are readable by this user and on a "
        "local filesystem, or configure a system interpreter for extensions",
    )
