"""crewckpt.format."""
