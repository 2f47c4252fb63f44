"""motionmatch: motion matching for responsive character animation.

Units: metres and seconds; Y up; quaternions (w, x, y, z).
"""
__version__ = "0.1.0"
