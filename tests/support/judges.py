"""A real OpenAI-compatible judge endpoint on a local HTTP server (http.server in a thread), its request
log, and the fixtures that start it and clear the log (tests of the judge layer and judged rewards)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ARES_REPLY = (
    "Question: Which foods are good sources of iron for someone who feels tired all the time?\n"
    "Answer: Red meat, lentils and spinach are good sources of iron; vitamin C helps absorption.\n"
    "Criteria:\n- [3] Names at least two foods rich in iron.\n- [2] Mentions vitamin C improving absorption.\n"
    "- [1] Is short and friendly."
)


GATE = threading.Event()  # the "gated" behaviour answers only once a test sets it (cleared before each test)


class Endpoint(BaseHTTPRequestHandler):
    """Behaviour from the first path segment: /<behaviour>/v1/chat/completions."""

    log: list[dict] = []  # one entry per request: behaviour, prompt, auth header, time
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's name)
        behaviour = self.path.strip("/").split("/")[0]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        with self.lock:
            self.log.append(
                {
                    "behaviour": behaviour,
                    "prompt": prompt,
                    "auth": self.headers.get("Authorization"),
                    "t": time.monotonic(),
                }
            )
            attempts = sum(1 for e in self.log if e["behaviour"] == behaviour and e["prompt"] == prompt)
        if behaviour == "slow":
            time.sleep(1.0)
        if behaviour == "gated":  # a writer that is still writing until the test opens the gate (60 s at most)
            GATE.wait(60)
        if behaviour == "flaky" and attempts <= 2:  # two 503s, then an answer
            return self._send(503, b"busy")
        if behaviour == "garbage":
            return self._send(200, b"<html>not json</html>")
        if behaviour == "forbidden":
            return self._send(401, b'{"error": "bad key"}')
        if behaviour == "keyword":  # Yes iff the criterion's last word occurs in the response
            response = prompt.split("Response: ", 1)[1].split("\n\nCriterion: ")[0]
            criterion = prompt.split("Criterion: ", 1)[1].split("\n")[0]
            word = criterion.rstrip(".").split()[-1]
            reply = "Maybe" if word == "unclear" else ("Yes" if word in response else "No")
        elif behaviour == "feedback":  # DITTO's feedback model: feedback that quotes the rollout it is about
            response = prompt.split("Response: ", 1)[1].split("\n\nReference: ")[0]
            reply = f"Your response '{response[:30]}' does not state the final answer.\n\nSecond paragraph."
        elif behaviour in ("revise", "gated"):  # a rubric writer's revised criterion
            reply = "- The response states the final answer and checks it by a second method."
        elif behaviour == "ares":  # one well-formed ARES instance about iron (faithful to the iron document only)
            reply = ARES_REPLY
        else:
            reply = {"malformed": "Maybe, it depends.", "scale": "Score: 7/10"}.get(behaviour)
        if reply is None:
            reply = "Yes." if "good" in prompt else "no"
        choice = {"message": {"role": "assistant", "content": reply}}
        if behaviour == "logprobs":  # top log-probs of the first token
            choice["logprobs"] = {
                "content": [{"top_logprobs": [{"token": "Yes", "logprob": -0.2}, {"token": " no", "logprob": -1.8}]}]
            }
        self._send(200, json.dumps({"choices": [choice]}).encode())

    def _send(self, code: int, data: bytes):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(autouse=True)
def clear_log():
    Endpoint.log.clear()
    GATE.clear()
    yield
    GATE.set()  # no request of a finished test is left waiting


def requests_for(behaviour: str) -> list[dict]:
    return [e for e in Endpoint.log if e["behaviour"] == behaviour]
