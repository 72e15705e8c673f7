"""crewckpt.backends."""
