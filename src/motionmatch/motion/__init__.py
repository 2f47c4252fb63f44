"""Animations and what is computed from them: skeletons, preprocessing, retargeting, metrics."""
