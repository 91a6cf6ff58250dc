"""The bulk job's worker side: stages that Ray Data runs in its tasks and actors. Imports `qa_core` and itself only."""
