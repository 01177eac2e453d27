"""Local stand-ins for external services, speaking their real wire formats."""

from tests.fakes.openai_server import FakeOpenAI, ReceivedRequest

__all__ = ["FakeOpenAI", "ReceivedRequest"]
