"""Runtime character: springs, controller, inertialization, matcher loop and touch-ups."""
