"""The ``corral`` command line: commands, chat, demo and rendering."""
