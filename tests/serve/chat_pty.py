#!/usr/bin/env python3
"""wren chat through a pseudo-terminal: send a message, read the streamed reply, stop a long
answer with Ctrl-C (the chat stays), /stats shows that turn 2 ran only its new tokens,
/save and /load, then the same conversation without a terminal (plain stdin/stdout).
Usage: chat_pty.py WREN_BINARY MODEL_DIR"""
import os, pty, re, select, subprocess, sys, tempfile, time

wren, model = sys.argv[1], sys.argv[2]


def fail(msg, out=""):
    print("FAIL", msg, "\n--- output ---\n" + out)
    sys.exit(1)


class Pty:
    def __init__(self, args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(args[0], args)
        self.out = ""
        self.out_start = 0

    def read_until(self, pattern, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            m = re.search(pattern, self.out[self.out_start:], re.S)  # in what came since mark()
            if m:
                return m
            r, _, _ = select.select([self.fd], [], [], 0.2)
            if r:
                try:
                    self.out += os.read(self.fd, 4096).decode("utf-8", "replace")
                except OSError:
                    break
        fail(f"no {pattern!r} within {timeout} s", self.out)

    def send(self, text):
        os.write(self.fd, text.encode())

    def mark(self):
        self.out_start = len(self.out)

    def since_mark(self):
        return self.out[self.out_start:]


args = [wren, "chat", "-m", model, "--temp", "0", "-n", "24", "-t", "1"]
p = Pty(args)
p.read_until(r"> $")
p.mark()
p.send("Hello, who are you?\n")
p.read_until(r"Hello, who are you\?\r?\n(.+?)\r?\n> $")
reply1 = re.search(r"Hello, who are you\?\r?\n(.+?)\r?\n> $", p.since_mark(), re.S).group(1)
if not reply1.strip():
    fail("empty reply", p.out)

p.mark()
p.send("/stats\n")
m = p.read_until(r"last turn: (\d+) new tokens run")
turn1 = int(m.group(1))

# Turn 2 runs only the end of answer 1, the message and the opening of answer 2.
p.mark()
p.send("Tell me more.\n")
p.read_until(r"Tell me more\.\r?\n.+?\r?\n> $")
p.mark()
p.send("/stats\n")
m = p.read_until(r"session: (\d+) of \d+ tokens.*?last turn: (\d+) new tokens run(,[^(]*)?")
session_tokens, turn2 = int(m.group(1)), int(m.group(2))
if m.group(3) or turn2 >= session_tokens - turn1:
    fail(f"turn 2 ran {turn2} tokens of a {session_tokens}-token session: the earlier turn was run again", p.out)

# Ctrl-C stops a long answer, not the chat (a second chat, allowed 4000 tokens per answer).
p.send("/quit\n")
os.waitpid(p.pid, 0)
p = Pty(args[:args.index("-n")] + ["-n", "4000"] + args[args.index("-n") + 2:])
p.read_until(r"> $")
p.mark()
p.send("Write a very long story.\n")
p.read_until(r"long story\.\r?\n.{10}")  # the answer has started
p.send("\x03")
p.read_until(r"\[stopped\]\r?\n> $")
if os.waitpid(p.pid, os.WNOHANG) != (0, 0):
    fail("Ctrl-C ended the chat", p.out)
p.mark()
p.send("/stats\n")
m = p.read_until(r"last turn: \d+ new tokens run[^\n]*, (\d+) generated")
if int(m.group(1)) >= 4000:
    fail("Ctrl-C did not stop the answer", p.out)

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "chat.json")
    p.mark()
    p.send(f"/save {path}\n")
    p.read_until(r"saved to")
    if not os.path.exists(path):
        fail("/save wrote nothing", p.out)
    p.send("/reset\n")
    p.read_until(r"cleared")
    p.mark()
    p.send(f"/load {path}\n")
    p.read_until(r"loaded from")
    p.mark()
    p.send("/stats\n")
    m = p.read_until(r"session: (\d+) of")
    if int(m.group(1)) == 0:
        fail("/load restored no tokens", p.out)
p.send("/quit\n")
_, status = os.waitpid(p.pid, 0)
if os.WEXITSTATUS(status) != 0:
    fail(f"/quit exited {os.WEXITSTATUS(status)}", p.out)

# Without a terminal: one answer per line, the same text as the terminal's first answer.
r = subprocess.run(args, input="Hello, who are you?\n", capture_output=True, text=True, timeout=120)
if r.returncode != 0 or r.stdout.strip() != reply1.strip().replace("\r", ""):
    fail(f"piped: status {r.returncode}, {r.stdout!r} vs the terminal's {reply1!r}", r.stderr)
print("ok   wren chat through a pseudo-terminal: streamed reply, turn 2 ran", turn2, "new tokens of", session_tokens,
      "; Ctrl-C stopped an answer; /save /load; piped stdin")
