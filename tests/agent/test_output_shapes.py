"""The reference's output shapes: tool results as text, image and file parts
(``ToolOutputImage``...), hand-written and non-strict output schemas (``AgentOutputSchema``),
and stored Responses prompts (``Agent(prompt=...)``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from openai import AsyncOpenAI

from sandmem import (
    Agent,
    AgentOutputSchema,
    AgentOutputSchemaBase,
    GenerateDynamicPromptData,
    ModelBehaviorError,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    ToolOutputFileContent,
    ToolOutputImage,
    ToolOutputText,
    UserError,
    function_tool,
)
from sandmem.agent._tool_output import to_tool_output
from sandmem.testing import FunctionModel


def test_tool_results_become_content_parts() -> None:
    image = {"type": "image", "image_url": "https://example.com/a.png", "detail": "auto"}
    assert to_tool_output(image) == [
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}
    ]
    mixed = [ToolOutputText(text="see"), ToolOutputFileContent(file_id="file-1", filename="a")]
    assert to_tool_output(mixed) == [
        {"type": "input_text", "text": "see"},
        {"type": "input_file", "file_id": "file-1", "filename": "a"},
    ]
    # a dict that is not one of these shapes stays data, sent as JSON
    assert to_tool_output({"type": "image"}) == '{"type": "image"}'
    assert to_tool_output({"city": "Oslo"}) == '{"city": "Oslo"}'
    with pytest.raises(ValueError, match="image_url or a file_id"):
        ToolOutputImage()


async def test_an_image_result_reaches_the_responses_api(fake_openai: FakeOpenAIServer) -> None:
    @function_tool
    def snapshot() -> ToolOutputImage:
        """Take a snapshot."""
        return ToolOutputImage(image_url="data:image/png;base64,iVBOR", detail="low")

    def handler(req: FakeRequest) -> FakeReply:
        if not req.tool_outputs():
            return FakeReply(tool_calls=[("snapshot", {}, "c1")])
        return FakeReply(text="a picture")

    fake_openai.handler = handler
    async with AsyncOpenAI(api_key="k", base_url=fake_openai.base_url) as client:
        agent = Agent(name="a", model=OpenAIResponsesModel("m", client), tools=[snapshot])
        result = await Runner.run(agent, "look")
    assert result.final_output == "a picture"
    sent = fake_openai.requests[1].tool_outputs()["c1"]
    assert sent == [
        {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "low"}
    ]


@dataclass
class Jokes:
    jokes: dict[int, str]


class FirstWord(AgentOutputSchemaBase):
    """A hand-written output format: the answer's first word, upper-cased."""

    def is_plain_text(self) -> bool:
        return False

    def name(self) -> str:
        return "first word"

    def json_schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"words": {"type": "array"}}}

    def is_strict_json_schema(self) -> bool:
        return False

    def validate_json(self, json_str: str) -> Any:
        return json.loads(json_str)["words"][0].upper()


async def test_non_strict_and_hand_written_output_schemas() -> None:
    answers = iter(['{"jokes": {"1": "knock knock"}}', '{"words": ["hello", "there"]}', "{}", "{}"])
    model = FunctionModel(lambda request: next(answers))
    agent = Agent(name="a", model=model, output_type=Jokes)
    with pytest.raises(UserError, match="free-form keys"):
        await Runner.run(agent, "jokes")  # strict mode cannot express dict[int, str]
    agent.output_type = AgentOutputSchema(Jokes, strict_json_schema=False)
    assert (await Runner.run(agent, "jokes")).final_output == Jokes({1: "knock knock"})
    sent = model.requests[0].output_schema
    assert sent is not None and not sent.strict and sent.name == "Jokes"
    agent.output_type = FirstWord()
    assert (await Runner.run(agent, "words")).final_output == "HELLO"
    assert model.requests[1].output_schema is not None
    assert model.requests[1].output_schema.name == "first_word"
    with pytest.raises(ModelBehaviorError, match="refused by first word"):
        await Runner.run(agent, "words")  # the schema's validate_json rejects "{}"
    # refused once, the model was asked once to repair its answer, and refused again
    assert "could not be used" in str(model.requests[-1].input[-1]["content"])
    assert AgentOutputSchema(str).is_plain_text()


async def test_stored_prompts_go_to_the_responses_api(fake_openai: FakeOpenAIServer) -> None:
    def dynamic(data: GenerateDynamicPromptData) -> dict[str, Any]:
        return {"id": "pmpt_1", "version": "2", "variables": {"style": data.context.context}}

    async with AsyncOpenAI(api_key="k", base_url=fake_openai.base_url) as client:
        responses = OpenAIResponsesModel("m", client)
        await Runner.run(Agent(name="a", model=responses, prompt={"id": "pmpt_0"}), "hi")
        await Runner.run(Agent(name="a", model=responses, prompt=dynamic), "hi", context="haiku")
        chat = Agent(name="a", model=OpenAIChatCompletionsModel("m", client), prompt=dynamic)
        with pytest.raises(UserError, match="needs the Responses API"):
            await Runner.run(chat, "hi", context="haiku")
    assert fake_openai.requests[0].body["prompt"] == {"id": "pmpt_0"}
    assert fake_openai.requests[1].body["prompt"] == {
        "id": "pmpt_1",
        "version": "2",
        "variables": {"style": "haiku"},
    }
    assert len(fake_openai.requests) == 2
    with pytest.raises(UserError, match="prompt must be a dict with an 'id'"):
        Agent(name="a", prompt={"version": "1"})
