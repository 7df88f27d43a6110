"""Control: when and where to compute. Pure logic with an injected clock; no sockets."""
