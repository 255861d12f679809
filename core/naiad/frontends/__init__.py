"""Protocol frontends: they decode the wire into core requests and encode the answers."""
