"""crewckpt.views."""
