"""Run folders and the files in them: atomic writes that follow the umask, run folders with their
manifest and lock, checkpoints, Parquet shards with checksums, metric sinks, progress bars, and the
fault-injection seam of the kill-and-resume tests. Below everything but :mod:`tsctl.config`."""
