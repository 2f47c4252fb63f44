"""The server's clock and limits: the fixed simulation step, how many pages it serves at once, which
port it tries, and how long a connection may take. No imports: the command line reads these for its
help without loading the server."""

DT = 1.0 / 60.0                 # s: every session and the crowd step at 60 Hz
MAX_CATCHUP = 4                 # fixed steps per wake-up before dropping time
# Every session steps its character on the one event loop thread; past this many the pages already
# connected lose their 60 fps on a 2-core machine (measured with `motionmatch bench serve`, docs/ROBUSTNESS.md).
MAX_SESSIONS = 20      # measured: 20 pages keep 60 fps on a 2-core machine, 32 do not (docs/ROBUSTNESS.md)
# A connection must deliver a request's headers (and be idle between requests) within this many seconds;
# upload bodies must arrive within BODY_TIMEOUT_S. Half-open requests are dropped, not held.
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
PORT_TRIES = 10                 # a busy --port moves on to the next ones
