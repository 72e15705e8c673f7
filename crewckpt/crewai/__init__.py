"""crewckpt.crewai."""
