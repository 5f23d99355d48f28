"""The floor under commit → ``watch()``: the same hops with no segcat in them.

A bare idempotent producer (acks=all, one record at a time, paced like the segcat scenario)
→ the broker → a bare consumer in a process of its own that PUBLISHes each record's offset and
broker time on a Redis channel → a subscriber process. Latency is counted as in the segcat
scenario (arrival − the record's LogAppendTime), so the difference between the two is what
segcat's materializer and watcher add on this machine: judging the record, the Redis script
(head + stream + publish) and decoding the event.
"""

from __future__ import annotations

import json
import time
import uuid
from multiprocessing.synchronize import Event
from queue import Queue
from typing import Any

import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.read_processes import CTX
from bench.runner import NS_PER_MS, summary, to_ms
from segcat.catalog.config import Config

STOP = b"stop"


def _relay(config: Config, topic: str, channel: str, ready: Event) -> None:
    consumer = Consumer(
        {
            **config.kafka_client_config(),
            "group.id": f"bench-floor-{uuid.uuid4().hex}",
            "fetch.wait.max.ms": 100,
            "fetch.min.bytes": 1,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    client = redis.Redis.from_url(config.redis_url)
    ready.set()
    try:
        while True:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            if msg.value() == STOP:
                return
            client.publish(channel, json.dumps({"offset": msg.offset(), "ts": msg.timestamp()[1]}))
    finally:
        consumer.close()


def _subscriber(config: Config, channel: str, count: int, out: Queue[Any], ready: Event) -> None:
    pubsub = redis.Redis.from_url(config.redis_url).pubsub()
    pubsub.subscribe(channel)
    while pubsub.get_message(timeout=1.0) is None:
        pass  # the subscribe confirmation
    ready.set()
    arrivals: list[int] = []
    while len(arrivals) < count:
        message = pubsub.get_message(timeout=1.0)
        if message is not None and message["type"] == "message":
            arrived = time.time_ns()
            arrivals.append(arrived - json.loads(message["data"])["ts"] * NS_PER_MS)
    out.put(arrivals)


def run_floor(config: Config, commits: int, pause_s: float) -> dict[str, Any]:
    """``commits`` records through the bare chain; the latency summary and the samples (µs)."""
    topic = f"bench_floor_{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config.kafka_client_config())
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})])[
        topic
    ].result(30)
    channel = f"bench:floor:{topic}"
    relay_ready, sub_ready, out = CTX.Event(), CTX.Event(), CTX.Queue()
    relay = CTX.Process(target=_relay, args=(config, topic, channel, relay_ready), daemon=True)
    sub = CTX.Process(target=_subscriber, args=(config, channel, commits, out, sub_ready), daemon=True)
    relay.start()
    sub.start()
    producer = Producer({**config.kafka_client_config(), "acks": "all", "enable.idempotence": True})
    try:
        if not (relay_ready.wait(60) and sub_ready.wait(60)):
            raise RuntimeError("the floor's relay or subscriber did not start")
        time.sleep(1.0)
        value = b"x" * 200  # about the size of a one-segment commit record
        for _ in range(commits):
            producer.produce(topic, value)
            producer.flush()
            if pause_s:
                time.sleep(pause_s)
        samples: list[int] = out.get(timeout=120)
        producer.produce(topic, STOP)
        producer.flush()
    finally:
        relay.join(30)
        for proc in (relay, sub):
            if proc.is_alive():
                proc.kill()
        admin.delete_topics([topic])
    return {
        "what": "bare producer → broker → bare consumer → Redis PUBLISH → subscriber (no segcat)",
        "commits": commits,
        "pause_s": pause_s,
        "arrival_minus_broker_ts": summary(to_ms(samples)),
        "samples_arrival_minus_broker_ts_us": [round(v / 1000) for v in samples],
    }
