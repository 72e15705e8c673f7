"""crewckpt.cli."""
