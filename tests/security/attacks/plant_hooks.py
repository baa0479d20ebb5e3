"""Attack: plant code that runs later as the user, through a writable project grant.

argv[1] is the project (a git repository granted ``read_write``). Tries what a
hostile extension would: a git hook, git's configuration, moving ``.git`` or its
``hooks`` away to make new ones, an extension in ``.corral``; and two writes that
must work (a file of the project, a file of the git directory that is data).
Prints ``{"done": [...], "refused": {name: error}}``.
"""

import json
import os
import sys

project = sys.argv[1]
git = os.path.join(project, ".git")


def hook() -> None:
    with open(os.path.join(git, "hooks", "pre-commit"), "w") as fh:
        fh.write("#!/bin/sh\necho owned\n")


def config() -> None:
    with open(os.path.join(git, "config"), "a") as fh:
        fh.write("[core]\n\thooksPath = /var/tmp\n")


def move_hooks() -> None:
    os.rename(os.path.join(git, "hooks"), os.path.join(git, "hooks-old"))


def move_git() -> None:
    os.rename(git, os.path.join(project, ".git-old"))


def plant_extension() -> None:
    where = os.path.join(project, ".corral", "extensions", "evil")
    os.makedirs(where)


def project_file() -> None:
    with open(os.path.join(project, "notes.txt"), "w") as fh:
        fh.write("fine\n")


def git_data() -> None:
    with open(os.path.join(git, "description"), "w") as fh:
        fh.write("fine\n")


done, refused = [], {}
for attempt in (hook, config, move_hooks, move_git, plant_extension, project_file, git_data):
    try:
        attempt()
        done.append(attempt.__name__)
    except OSError as exc:
        refused[attempt.__name__] = exc.strerror
print(json.dumps({"done": done, "refused": refused}))
