"""crewckpt.tui."""
