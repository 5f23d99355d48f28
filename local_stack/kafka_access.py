"""Who may do what on a ``--secure`` stack: three SCRAM principals and their Kafka ACLs.

- ``writer``: creates, describes and drops table topics, produces commits and reads them back
  (a writer judges its commit against the log);
- ``reader``: reads table topics and their configs, nothing else;
- ``materializer``: reads every table and owns its consumer group; its upkeep also writes
  prune records and deletes purged tables' topics, so it has WRITE and DELETE on table topics.

Readers and writers read by explicit assignment; librdkafka still looks up the coordinator
of their throwaway ``segcat-reader-*`` group, hence READ on that group prefix. Everything is
PREFIXED on ``segcat.`` (the table topics) so a principal never sees another application's
topics. The node certificate's principal is the only super user.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from segcat.local_stack import secret_files
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import Layout

PRINCIPALS = ("writer", "reader", "materializer")
TOPIC_PREFIX = "segcat."
READER_GROUP_PREFIX = "segcat-reader-"
MATERIALIZER_GROUP_PREFIX = "segcat-materializer"
SCRAM_ITERATIONS = 8192
_TIMEOUT_S = 30.0

_Grant = tuple[ResourceType, str, AclOperation]

_GRANTS: dict[str, list[_Grant]] = {
    "writer": [
        *[
            (ResourceType.TOPIC, TOPIC_PREFIX, op)
            for op in (
                AclOperation.CREATE,
                AclOperation.DESCRIBE,
                AclOperation.DESCRIBE_CONFIGS,
                AclOperation.ALTER_CONFIGS,
                AclOperation.READ,
                AclOperation.WRITE,
                AclOperation.DELETE,
            )
        ],
        (ResourceType.GROUP, READER_GROUP_PREFIX, AclOperation.READ),
    ],
    "reader": [
        (ResourceType.TOPIC, TOPIC_PREFIX, AclOperation.DESCRIBE),
        (ResourceType.TOPIC, TOPIC_PREFIX, AclOperation.DESCRIBE_CONFIGS),
        (ResourceType.TOPIC, TOPIC_PREFIX, AclOperation.READ),
        (ResourceType.GROUP, READER_GROUP_PREFIX, AclOperation.READ),
    ],
    "materializer": [
        *[
            (ResourceType.TOPIC, TOPIC_PREFIX, op)
            for op in (
                AclOperation.DESCRIBE,
                AclOperation.DESCRIBE_CONFIGS,
                AclOperation.READ,
                AclOperation.WRITE,
                AclOperation.DELETE,
            )
        ],
        (ResourceType.GROUP, MATERIALIZER_GROUP_PREFIX, AclOperation.READ),
        (ResourceType.GROUP, MATERIALIZER_GROUP_PREFIX, AclOperation.DESCRIBE),
        (ResourceType.GROUP, READER_GROUP_PREFIX, AclOperation.READ),
    ],
}


def password_file(layout: Layout, principal: str) -> Path:
    """The principal's password file (mode 0600), created with a random password on first use."""
    if principal not in PRINCIPALS:
        raise StackError(f"unknown principal {principal!r}; the secure stack has {', '.join(PRINCIPALS)}")
    return secret_files.password_file(layout.secrets / f"kafka-{principal}.password")


def bindings() -> list[AclBinding]:
    return [
        AclBinding(
            kind,
            name,
            ResourcePatternType.PREFIXED,
            f"User:{principal}",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for principal, grants in _GRANTS.items()
        for kind, name, op in grants
    ]


def apply(admin: AdminClient, layout: Layout) -> None:
    """Upsert every principal's SCRAM-SHA-512 credential and create its ACLs (both idempotent).

    ``admin`` must connect as a super user (the node certificate). Passwords travel only
    inside the admin request, never on a command line or in a log.
    """
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            principal,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            password_file(layout, principal).read_text().strip().encode(),
        )
        for principal in PRINCIPALS
    ]
    try:
        for future in admin.alter_user_scram_credentials(upserts, request_timeout=_TIMEOUT_S).values():
            future.result()
        for future in admin.create_acls(bindings(), request_timeout=_TIMEOUT_S).values():
            future.result()
    except Exception as exc:  # KafkaException and friends; the message names no password
        raise StackError(f"could not create the secure stack's Kafka principals and ACLs: {exc}") from exc
