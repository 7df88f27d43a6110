"""Transport: bytes <-> typed requests. No decisions are made here."""
