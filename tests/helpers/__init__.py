"""The test suite's helpers, in one package (``tests/`` is on ``sys.path``).

* :mod:`helpers.paths`: where things are (repository, examples, fixtures);
* :mod:`helpers.exports`: the one check that a package exports exactly ``__all__``;
* :mod:`helpers.procs`: looking at processes (descendants, liveness, fds);
* :mod:`helpers.hostile`: FIFOs, device links, huge and special files where corral
  reads one, and a child process bounded in time and memory to read them in;
* :mod:`helpers.supkit`: supervisors on temporary extensions (tests/supervisor);
* :mod:`helpers.agentkit`: agent options, extension dirs, event collectors;
* :mod:`helpers.rpc_harness`: ``corral rpc`` as a real process;
* :mod:`helpers.mcpkit`: an MCP server written with the SDK, over stdio or HTTP;
* :mod:`helpers.http_fakes`: fake model servers over real HTTP, strict as the real APIs
  (:mod:`helpers.api_rules`: what OpenAI and Anthropic refuse, and their error documents);
* :mod:`helpers.cancelkit`: a cancellation at the N-th checkpoint, a model as strict as the APIs;
* :mod:`helpers.benchkit`: one bench module run quickly, its rows checked;
* :mod:`helpers.sandbox_harness`, :mod:`helpers.trust_harness`,
  :mod:`helpers.supervised`: hostile extensions against real sandboxes, as root and
  as an unprivileged user.
"""
