"""The app's crowd mode: a crowd stepped in its own process and streamed to the page."""
