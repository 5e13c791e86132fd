"""What a run needs from its surroundings: work directory, its lock, checkpoints, preemption, several
hosts, compile cache, stored compiled programs, the C heap given back."""

# Its public modules (any other module is a part of these).
__all__ = ["averaging", "checkpoint", "compile_cache", "heap", "lock", "multihost", "platform",
           "preemption", "stored_programs", "workdir"]
