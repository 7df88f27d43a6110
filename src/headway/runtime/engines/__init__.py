"""Engines start, watch and restart workers (local subprocesses; Ray actors later)."""
