"""Fixtures shared by the test files."""

import socket

import pytest


@pytest.fixture(autouse=True)
def explorer_home(tmp_path_factory, monkeypatch):
    """Every test records runs into its own store, never the user's (~/.explorer)."""
    path = tmp_path_factory.mktemp("explorer-home")
    monkeypatch.setenv("EXPLORER_HOME", str(path))
    return path


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection or resolve a host fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
