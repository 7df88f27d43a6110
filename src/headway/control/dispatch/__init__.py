"""Dispatch: the scheduler's decisions carried out through the engine (`relay.Relay`), as
messages a worker reads (`messages`), and the workers' replies turned into answers.
"""
