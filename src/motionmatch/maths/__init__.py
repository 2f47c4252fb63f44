"""Rotations, quaternions, forward kinematics, springs and IK: the maths every stage shares."""
