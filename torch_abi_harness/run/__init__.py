"""The run wing: one run of a plan, from prepared cells to the report directory.

prepare: what cells need before they run (environments, overlays, builds); cells: one cell's path, the same for
`run` and `mutate`; collect: a cell's files and exit code to an outcome; shard: a plan split into CI shards;
pipeline: the stage order of a run; launch: a run as a command asks for it (the matrix with its overrides, the
executing options); merge: a plan's shards merged into one report."""
