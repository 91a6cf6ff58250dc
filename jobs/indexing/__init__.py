"""The index of a corpus built by Ray Data: its passages read and split by tasks, each shard written by a task."""
