"""Model providers: the interface, the factory, offline, scripted and HTTP ones."""
