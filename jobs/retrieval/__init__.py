"""
Retrieval on Ray, shared by the bulk job and the benchmarks: the retrievers' actors (`retrieve`, `retrieve_dense`,
which run in Ray's workers) and their stages (`stages`), over an index that `jobs.indexing` builds.
"""
