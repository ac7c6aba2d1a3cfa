#!/usr/bin/env python3
"""wren chat through a pseudo-terminal: send a message, read the streamed reply, stop a long
answer with Ctrl-C (the chat stays), /stats shows that turn 2 ran only its new tokens,
/save then /load in a new chat restores the session's state (no token run again, the next
answer the one the first chat gave), damaged or foreign saved chats are refused naming the
file, then the same conversation without a terminal (plain stdin/stdout).
Usage: chat_pty.py WREN_BINARY MODEL_DIR"""
import atexit, os, pty, re, select, shutil, subprocess, sys, tempfile, time

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

# /save, then turn 3: the answer a chat loaded from the file must give again.
tmp = tempfile.mkdtemp()
atexit.register(shutil.rmtree, tmp, True)
saved = os.path.join(tmp, "chat.wren")
p.mark()
p.send(f"/save {saved}\n")
m = p.read_until(r"saved to .*?: (\d+) tokens of state")
if int(m.group(1)) != session_tokens or not os.path.exists(saved):
    fail(f"/save wrote {m.group(1)} tokens of a {session_tokens}-token session", p.out)
p.read_until(r"> $")  # the prompt before the message, so the echo follows it
p.mark()
p.send("And then?\n")
reply3 = re.search(r"And then\?\r?\n(.+?)\r?\n> $", p.read_until(r"And then\?\r?\n.+?\r?\n> $").group(0), re.S).group(1)
p.mark()
p.send("/stats\n")
turn3 = int(p.read_until(r"last turn: (\d+) new tokens run").group(1))
p.send("/quit\n")
os.waitpid(p.pid, 0)

# A new chat loads the state: nothing runs at /load, turn 3 runs only its own tokens and
# gives the same answer (temperature 0).
p = Pty(args)
p.read_until(r"> $")
p.mark()
p.send(f"/load {saved}\n")
m = p.read_until(r"loaded from .*?: (\d+) tokens of state")
if int(m.group(1)) != session_tokens:
    fail(f"/load restored {m.group(1)} tokens, the saved session held {session_tokens}", p.out)
p.mark()
p.send("/stats\n")
m = p.read_until(r"session: (\d+) of \d+ tokens.*?last turn: (\d+) new tokens run([^(\n]*).*?ran (\d+) prompt tokens in all")
if int(m.group(1)) != session_tokens or int(m.group(2)) != 0 or "loaded" not in m.group(3) or int(m.group(4)) != 0:
    fail("after /load the session ran tokens or lost some: " + m.group(0), p.out)
p.read_until(r"> $")
p.mark()
p.send("And then?\n")
again = re.search(r"And then\?\r?\n(.+?)\r?\n> $", p.read_until(r"And then\?\r?\n.+?\r?\n> $").group(0), re.S).group(1)
if again != reply3:
    fail(f"after /load turn 3 answered {again!r}, the saved chat answered {reply3!r}", p.out)
p.mark()
p.send("/stats\n")
m = p.read_until(r"last turn: (\d+) new tokens run(,[^(]*)?.*?ran (\d+) prompt tokens in all")
if int(m.group(1)) != turn3 or m.group(2) or int(m.group(3)) != turn3:
    fail(f"after /load turn 3 ran {m.group(1)} tokens, the saved chat's ran {turn3}", p.out)
p.send("/quit\n")
os.waitpid(p.pid, 0)

# Ctrl-C stops a long answer, not the chat (a second chat, allowed 4000 tokens per answer).
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
p.send("/quit\n")
_, status = os.waitpid(p.pid, 0)
if os.WEXITSTATUS(status) != 0:
    fail(f"/quit exited {os.WEXITSTATUS(status)}", p.out)

# Damaged and foreign saved chats: each refused naming the file, the chat unchanged (its
# answer the first chat's). Without a terminal: one answer per line.
data = open(saved, "rb").read()
bad = {"garbage": b"not a saved chat", "truncated": data[: len(data) // 2], "flipped": data[:-1] + bytes([data[-1] ^ 1]),
       "huge-json": data[:12] + (1 << 62).to_bytes(8, "little") + data[20:]}
for name, contents in bad.items():
    open(os.path.join(tmp, name), "wb").write(contents)
loads = "".join(f"/load {os.path.join(tmp, name)}\n" for name in bad)
r = subprocess.run(args, input=loads + "Hello, who are you?\n", capture_output=True, text=True, timeout=120)
for name in bad:
    if not re.search(rf"wren chat: {re.escape(os.path.join(tmp, name))}: ", r.stderr):
        fail(f"a {name} saved chat was not refused naming the file", r.stderr)
if r.returncode != 0 or r.stdout.strip() != reply1.strip().replace("\r", ""):
    fail(f"piped: status {r.returncode}, {r.stdout!r} vs the terminal's {reply1!r}", r.stderr)
r = subprocess.run(args + ["-c", "300"], input=f"/load {saved}\n", capture_output=True, text=True, timeout=120)
if r.returncode != 0 or not re.search(rf"{re.escape(saved)}: .*context", r.stderr):
    fail("a chat of another context was not refused naming the file and the context", r.stderr)
print("ok   wren chat through a pseudo-terminal: streamed reply, turn 2 ran", turn2, "new tokens of", session_tokens,
      "; /load restored", session_tokens, "tokens running none, turn 3 the same answer from", turn3,
      "new tokens; Ctrl-C stopped an answer; damaged and foreign files refused; piped stdin")
