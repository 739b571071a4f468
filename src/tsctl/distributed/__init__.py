"""Several processes: data-parallel training under ``torchrun`` (the process group, :mod:`.world`; FSDP2
sharding, :mod:`.fsdp`) and the GPU and CPU threads of each point of a parallel sweep (:mod:`.job_pinning`).

Plain ``tsctl train`` (no ``torchrun``, or ``torchrun --nproc_per_node=1``) never creates a process group
and never shards: every helper here is then the identity, and a run's numbers are those of one process.
"""
