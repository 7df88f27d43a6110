"""Runtime: worker processes that host models and execute one action at a time."""
