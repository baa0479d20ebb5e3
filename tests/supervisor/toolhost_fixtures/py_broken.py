"""Python tool module for the runner tests: fails to import."""

raise ImportError("this module is broken on purpose")
