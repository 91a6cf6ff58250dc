"""A settings field declares its default and its help together; `docs()` reads the help from the field."""

from dataclasses import dataclass

from qa_core.settings import Settings, setting, setting_factory


@dataclass(frozen=True)
class Example(Settings):
    """Settings of every kind of field."""

    size: int = setting(3, "how many")
    names: list[str] = setting_factory(list, "which ones")
    # A comment above a field is not its help.
    undocumented: bool = False  # nor is one beside it


def test_docs_are_the_declared_help_and_empty_where_none_is_declared() -> None:
    assert Example.docs() == {"size": "how many", "names": "which ones", "undocumented": ""}


def test_a_setting_keeps_its_default_and_a_factory_makes_a_new_value_per_instance() -> None:
    first, second = Example(), Example()
    assert Example.defaults() == {"size": 3, "names": [], "undocumented": False}
    first.names.append("a")
    assert second.names == []
