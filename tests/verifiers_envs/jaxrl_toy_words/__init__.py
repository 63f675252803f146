"""A verifiers 0.4 (``verifiers.v1``) taskset for tests/test_verifiers_env.py: write a word
backwards (reward 1 for the exact word, from a Python ``@reward``); a word whose reward
raises on purpose (``boom``) and one whose prompt is two user messages (``twice``)."""

import verifiers.v1 as vf

WORDS = ["cat", "dog", "sun", "map", "pen", "cup", "boom", "twice"]


class WordData(vf.TaskData):
    answer: str = ""


class WordTask(vf.Task[WordData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def correct(self, task, trace) -> float:
        if task.answer == "moob":
            raise RuntimeError("this reward fails on purpose")
        return float(trace.last_reply == task.answer)


class WordsConfig(vf.TasksetConfig):
    count: int = len(WORDS)


class ToyWords(vf.Taskset[WordTask, WordsConfig]):
    def load(self):
        for w in WORDS[: self.config.count]:
            prompt = f"Write {w} backwards." if w != "twice" else [vf.UserMessage(content="Hi."), vf.UserMessage(content="Again.")]
            yield WordTask(WordData(prompt=prompt, answer=w[::-1]), self.config.task)


__all__ = ["ToyWords"]
