"""The world the characters walk in: obstacles, routes round them, avoidance, terrain."""
