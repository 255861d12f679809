"""``RequestSizeLimitMiddleware``: naiad's body limit under Triton's name."""

from naiad_frontend_openai.limits import BodyLimit, oversized_message
from naiad_frontend_openai.settings import OpenAISettings


class RequestSizeLimitMiddleware(BodyLimit):
    def __init__(self, app, http_max_input_size: int) -> None:
        super().__init__(app, http_max_input_size, OpenAISettings().body_timeout_s)

    @staticmethod
    def _oversized_request_message(actual_bytes: int, max_bytes: int) -> str:
        return oversized_message(actual_bytes, max_bytes)
