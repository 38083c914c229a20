"""Helpers shared by test folders (real processes, not fakes)."""
