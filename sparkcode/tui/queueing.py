"""What the main screen does with messages typed while a turn runs: queue them, send
the first after the turn, steer them into the turn (``AgentPort.steer``), edit or
remove one. The widget is :class:`~.widgets.queue.MessageQueue`."""

from __future__ import annotations

from typing import Any, Protocol

from .agent_port import AgentPort
from .widgets.prompt import PromptInput
from .widgets.queue import MessageQueue, QueueAction, Queued


class QueueScreen(Protocol):
    """What queueing needs of the screen (the main screen is one): its prompt, agent,
    queue widget, whether a turn runs, and a way to send, tell and run in the
    background. A protocol, so this module does not import the screen that owns it."""

    @property
    def queue(self) -> MessageQueue: ...

    @property
    def prompt(self) -> PromptInput: ...

    @property
    def agent(self) -> AgentPort | None: ...

    @property
    def turn_running(self) -> bool: ...

    def refresh_bindings(self) -> None: ...

    def send(self, text: str) -> None: ...

    def notice(self, text: str) -> None: ...

    def error(self, text: str) -> None: ...

    def run_worker(self, work: Any, name: str | None = "", group: str = "default") -> Any: ...


class Queueing:
    """The queue's behaviour, over the screen's prompt, agent and queue widget."""

    def __init__(self, screen: QueueScreen) -> None:
        self.screen = screen

    @property
    def queue(self) -> MessageQueue:
        return self.screen.queue

    async def add(self, text: str) -> Queued:
        """Queue ``text``, sent after the running turn."""
        item = await self.queue.add(text)
        self.screen.refresh_bindings()
        return item

    async def send_now(self) -> None:
        """Ctrl+S: the prompt's text and every queued message go into the running turn;
        with no turn running, the first queued message is sent."""
        screen, prompt = self.screen, self.screen.prompt
        text = prompt.message.strip()
        if text and not text.startswith("/"):
            prompt.remember(prompt.value.strip())
            prompt.value = ""
            await self.add(text)
        for item in list(self.queue.items):
            if not screen.turn_running:
                await self.deliver(item)
                return
            self.steer(item)

    def steer(self, item: Queued) -> None:
        agent = self.screen.agent
        if not item.steering and agent is not None:
            self.queue.set_steering(item, True)
            agent.steer(item.text)

    async def deliver(self, item: Queued) -> None:
        """Send ``item`` as the next turn."""
        await self.queue.remove_item(item)
        self.screen.refresh_bindings()
        self.screen.send(item.text)

    async def steer_delivered(self, text: str) -> None:
        """The agent took a steered message into the turn: off the queue."""
        item = self.queue.find(text, steering=True)
        if item is not None:
            await self.queue.remove_item(item)
            self.screen.refresh_bindings()

    def take_back(self) -> None:
        """The turn ended before its next step: steered messages go after it instead."""
        agent = self.screen.agent
        for text in agent.take_steering() if agent is not None else []:
            item = self.queue.find(text, steering=True)
            if item is not None:
                self.queue.set_steering(item, False)

    def turn_ended(self, *, stopped: bool) -> None:
        """After a turn the first queued message goes out, unless the user stopped it."""
        screen = self.screen
        if not self.queue.items or screen.turn_running:
            return
        if stopped:
            screen.notice(f"{len(self.queue.items)} queued message(s) wait; Ctrl+S sends the first")
            return
        screen.run_worker(self.deliver(self.queue.items[0]), group="notices")

    async def acted(self, item: Queued, action: QueueAction) -> None:
        """A queued line's key: steer it, take it back to edit, or remove it."""
        screen, prompt = self.screen, self.screen.prompt
        if action == "steer":
            if screen.turn_running and screen.agent is not None:
                self.steer(item)
            else:
                await self.deliver(item)
            return
        if item.steering:
            screen.error(
                "that message is already handed to the running turn (it goes in at its next step)"
            )
            return
        if action == "edit" and prompt.value.strip():
            screen.error(
                "the prompt has text: send or clear it first, then edit the queued message"
            )
            return
        await self.queue.remove_item(item)
        screen.refresh_bindings()
        if action == "edit":
            prompt.value = item.text
        else:
            screen.notice("removed from the queue")
        prompt.focus()
