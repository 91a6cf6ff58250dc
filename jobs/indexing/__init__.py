"""Index building on Ray Data: the passages an index holds (`passages`) and their vectors (`embed`)."""
