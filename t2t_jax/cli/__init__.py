"""The console scripts and the one command-line parser (`flags`) they share."""
