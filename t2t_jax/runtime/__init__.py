"""What a run needs from its surroundings: work directory, its lock, checkpoints, preemption, several hosts, compile cache."""
