"""
Indexes of a documents table, one job per module: a run's index planned and completed with the parts its retrieval
method needs (`plan`), built in this process or by Ray Data (`build`: the passages read, split and numbered by tasks
in `passages`, the BM25 shards built and written by tasks in `bm25`), grown with more documents (`grow`), brought to
a changed documents table as a new version of its folder (`update`, `versions`), checked when given (`check`), its
dense part embedded and its approximate index built (`vectors`, over `embed`'s actor pool and `ann`), its folder's
layout and build record (`record`), and the documents read in this process (`documents`).
The bulk job and `python -m jobs.index` call it; it imports nothing of the bulk job.
"""
