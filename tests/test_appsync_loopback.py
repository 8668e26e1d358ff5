"""APSYN over real WebSocket connections on 127.0.0.1: the first frame is the peer's join, two
asyncio clients share an object, request results arrive, a refused join closes with 4041, and a
restarted server gives the state back from its sqlite file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gossamer.core.errors import ConfigError, OperationError, StateError
from gossamer.protocols.appsync import Status
from gossamer.runtimes.net import looppolicy
from gossamer.services.appsync.net import AppSyncClient, AppSyncWsServer

FAST: dict[str, Any] = {"port": 0, "min_ms": 5, "max_ms": 100, "key_iterations": 10}


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("mode", ["answering", "eager", "quiet"])
def test_two_clients_share_an_object_with_results_and_callbacks(
        mode: str, loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager: alice's requests go when made (``PeerConfig.eager``), mostly in rqsts of their
    own after her answer; quiet: both answer only the rounds they have requests for, in
    rounds of a fixed 5 ms (``PeerConfig.quiet``); the results and bob's view are the same.
    On asyncio's event loop and on uvloop's (``GOSSAMER_LOOP``), server and clients alike."""
    monkeypatch.setenv("GOSSAMER_LOOP", loop)
    looppolicy.run(_two_clients(mode))


async def _two_clients(mode: str) -> None:
    quiet = mode == "quiet"
    server_config = {**FAST, "max_ms": FAST["min_ms"]} if quiet else FAST
    async with AppSyncWsServer(**server_config) as server, \
            AppSyncClient(server.url, "quiz", timeout=5, eager=mode != "answering",
                          quiet=quiet) as alice, \
            AppSyncClient(server.url, "quiz", timeout=5, quiet=quiet) as bob:
        board = alice.share("board", {"question": 1})
        await alice.synced()
        seen: list[object] = []
        await bob.wait_until(lambda: "G//board" in bob.objects())
        bob_board = bob.share("board")
        bob_board.on_change(seen.append)
        board["question"] = 2  # requested, not yet applied
        result = board.update({"answer": "x"})
        assert await asyncio.wait_for(result, 5) in (Status.ACCEPTED, Status.MULTIPLE_ACCEPTED)
        await alice.synced()
        await bob.wait_until(lambda: bob_board.value == {"question": 2, "answer": "x"})
        assert seen and seen[-1] == {"question": 2, "answer": "x"}
        assert board["question"] == 2
        assert alice.client_id != bob.client_id


def test_the_first_frame_is_the_join_and_a_bad_key_is_closed_4041() -> None:
    asyncio.run(_bad_key())


async def _bad_key() -> None:
    async with AppSyncWsServer(session_key="sesame", **FAST) as server:
        async with aiohttp.ClientSession() as http, http.ws_connect(server.url) as ws:
            await ws.send_str('{"h":{"p":"APSYN/01","c":"","r":"0000","l":"0000"},'
                              '"b":{"id":"s;key=wrong"}}')
            msg = await asyncio.wait_for(ws.receive(), 5)
            assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 4041
            assert str(msg.extra).startswith("41 Unauthorized")
        with pytest.raises(OperationError):
            async with AppSyncClient(server.url, "s", key="wrong", timeout=5):
                raise AssertionError("a peer with the wrong session key joined")
        async with AppSyncClient(server.url, "s", key="sesame", timeout=5) as peer:
            assert peer.client_id == "0001"


def test_a_binary_frame_is_refused_at_once_with_4040() -> None:
    # APSYN is JSON text: a binary join waited for the 10 s handshake timeout, and a binary
    # request after the join was dropped without an answer
    asyncio.run(_binary())


async def _binary() -> None:
    join = ('{"h":{"p":"APSYN/01","c":"","r":"0000","l":"0000"},"b":{"id":"s"}}')
    async with AppSyncWsServer(**FAST) as server, aiohttp.ClientSession() as http:
        for joined in (False, True):
            async with http.ws_connect(server.url) as ws:
                if joined:
                    await ws.send_str(join)
                    init = await asyncio.wait_for(ws.receive(), 5)
                    assert init.type is aiohttp.WSMsgType.TEXT and '"r":"0000"' in init.data
                await ws.send_bytes(join.encode())
                while (msg := await asyncio.wait_for(ws.receive(), 5)).type is \
                        aiohttp.WSMsgType.TEXT:
                    pass  # the rounds' syncs of the joined peer, until the close
                assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 4040, (joined, msg)
                assert str(msg.extra).startswith("40 Bad Request: a binary frame"), msg.extra


def test_a_restarted_server_gives_the_state_back(tmp_path: Path) -> None:
    asyncio.run(_restart(tmp_path))


async def _restart(tmp_path: Path) -> None:
    async with AppSyncWsServer(data_dir=tmp_path, **FAST) as server:
        url = server.url
        async with AppSyncClient(url, "keep", timeout=5) as peer:
            peer.share("notes", {"text": "hello"})
            await peer.synced()
    async with AppSyncWsServer(data_dir=tmp_path, **FAST) as server, \
            AppSyncClient(server.url, "keep", timeout=5) as peer:
        assert peer.objects() == {"G//notes": {"text": "hello"}}


WEB_ROOT = Path(__file__).resolve().parent.parent / "web" / "appsync"


def test_the_demo_page_and_the_protocol_share_the_port() -> None:
    asyncio.run(_page_beside_protocol())


async def _page_beside_protocol() -> None:
    async with AppSyncWsServer(web_root=WEB_ROOT, **FAST) as server, \
            aiohttp.ClientSession() as http:
        url = server.page_url
        assert url is not None and url == server.url.replace("ws://", "http://")
        async with http.get(url) as page:  # a plain GET of / is the page
            assert page.status == 200 and page.content_type == "text/html"
            assert 'src="demo.js"' in await page.text()
        async with http.get(url + "apsyn.js") as module:  # ES modules need JS
            assert module.status == 200 and "javascript" in module.content_type
            assert "export class ApsynClient" in await module.text()
        async with http.get(url + "../../pyproject.toml") as escape:
            assert escape.status in (403, 404)
        async with AppSyncClient(server.url, "page", timeout=5) as peer:  # an upgrade at /
            assert peer.client_id == "0001"
    with pytest.raises(ConfigError):
        AppSyncWsServer(web_root=WEB_ROOT.parent / "missing", **FAST)
    async with AppSyncWsServer(**FAST) as bare, aiohttp.ClientSession() as http:
        assert bare.page_url is None
        async with http.get(bare.url.replace("ws://", "http://")) as plain:
            assert plain.status == 400  # no page: / is the protocol only


def test_a_server_per_data_dir_a_ws_url_and_requests_answered_at_close(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(ConfigError, match="url must be ws://"):
            AppSyncClient("http://127.0.0.1:1/", "quiz")
        async with AppSyncWsServer(port=0, data_dir=tmp_path, min_ms=2000,
                                   max_ms=4000) as server:
            second = AppSyncWsServer(port=0, data_dir=tmp_path)
            with pytest.raises(StateError, match="another live APSYN server"):
                await second.start()
            client = AppSyncClient(server.url, "s", timeout=10)
            await client.connect()
            pending = client.share("board", {"q": 0}).set("q", 5)  # its round is 2 s away
            await client.close()
            assert await asyncio.wait_for(pending, 10) is None  # as when the link breaks
        again = AppSyncWsServer(port=0, data_dir=tmp_path)  # free once the first stopped
        await again.start()
        await again.stop()

    asyncio.run(asyncio.wait_for(main(), 60))
