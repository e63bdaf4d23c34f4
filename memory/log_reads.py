"""The memory service's reads of the log (groups, sessions, messages) and its plain writes of group and
session records: mixed into ``memory.service.MemoryService``."""

from __future__ import annotations

from memory.errors import NotFoundError
from memory.models import GroupConfiguration, Message, MessageState, SessionInfo
from memory.pages import MessagePage, history_page
from memory.store.factory import Store


class LogReads:
    store: Store

    def put_group(self, config: GroupConfiguration) -> None:
        self.store.log.put_group_config(config)

    def group(self, group_id: str) -> GroupConfiguration:
        """The group's configuration (a default one for a group that has sessions but none set)."""
        config = self.store.log.get_group_config(group_id)
        if config is not None:
            return config
        if not self.store.log.list_sessions(group_id):
            raise NotFoundError("group not found")
        return GroupConfiguration(group_id=group_id)

    def group_exists(self, group_id: str) -> bool:
        """Whether anything names the group (its registry entry or a session)."""
        return self.store.log.group_exists(group_id) or bool(self.store.log.list_sessions(group_id))

    def groups(self) -> list[str]:
        return self.store.log.list_groups()

    def put_session(self, info: SessionInfo) -> None:
        self.store.log.put_session_info(info)

    def session(self, group_id: str, session_id: str) -> SessionInfo:
        info = self.store.log.get_session_info(group_id, session_id)
        if info is None:
            raise NotFoundError("session not found")
        return info

    def sessions(self, group_id: str) -> list[SessionInfo]:
        return self.store.log.list_sessions(group_id)

    def messages(self, group_id: str, session_id: str, *, unfinished: bool = False) -> list[Message]:
        """The session's messages in event-time order (``unfinished``: only those not in an episode yet)."""
        states = [MessageState.PENDING, MessageState.FORMING] if unfinished else None
        return [stored.message for stored in self.store.log.list_messages(group_id, session_id, states=states)]

    def message(self, group_id: str, session_id: str, message_id: str) -> Message:
        """One stored message of the session, whole and verbatim."""
        found = self.store.log.get_messages(group_id, session_id, [message_id]).get(message_id)
        if found is None:
            raise NotFoundError(f"no message {message_id!r} in this session")
        return found.message

    def history(self, group_id: str, session_id: str, *, limit: int, cursor: str | None) -> MessagePage:
        """A page of the session's messages in event-time order, after ``cursor`` (``memory.pages``)."""
        return history_page(self.store.log.list_messages(group_id, session_id), limit=limit, cursor=cursor)

    def vector_count(self, group_id: str) -> int:
        return self.store.vectors.count(group_id)

    def heartbeat(self) -> None:
        """Raises ``StoreUnavailableError`` when the store cannot be reached."""
        self.store.admin.heartbeat()
