"""What a run needs from its surroundings: work directory, its lock, checkpoints, preemption, several hosts, compile cache."""

# Its public modules (any other module is a part of these).
__all__ = ["averaging", "checkpoint", "compile_cache", "lock", "multihost", "platform",
           "preemption", "read_failures", "workdir"]
