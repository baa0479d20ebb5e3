"""Built-in tools the agent offers the model."""
