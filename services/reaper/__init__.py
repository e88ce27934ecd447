"""reaper."""
