"""``RestrictedFeatures``: naiad's parsing of --openai-restricted-api under Triton's name."""

from naiad_frontend_openai.settings import parse_restrictions


class RestrictedFeatures:
    def __init__(self, args: list[list[str]]) -> None:
        self._restrictions = parse_restrictions(args)

    def RestrictionDict(self) -> dict[str, tuple[str, str]]:
        return dict(self._restrictions)

    def RestrictionSummary(self) -> dict[str, str]:
        return {api: header for api, (header, _) in self._restrictions.items()}

    def IsRestricted(self, api: str) -> bool:
        return api in self._restrictions
