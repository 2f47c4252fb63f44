"""VR avatars from three trackers (seed 002, chapter 4): tracker streams, the body-orientation network, upper-body pieces."""
