"""What a run needs from its surroundings: the work directory and its run lock, checkpoints (and what a failed
read means), preemption, several hosts, the platform and its compilation cache."""

# Its public modules (any other module is a part of these).
__all__ = ["averaging", "checkpoint", "multihost", "platform", "preemption", "workdir"]
