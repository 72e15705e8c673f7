"""crewckpt.history."""
