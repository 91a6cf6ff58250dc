"""
Index building on Ray Data: the passages an index holds, read, split and numbered by tasks (`passages`), the BM25
shards built and written by tasks (`bm25`), and the passages' vectors written by an embedding actor pool (`embed`).
"""
