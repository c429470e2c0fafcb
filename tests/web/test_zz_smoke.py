from tests.web.conftest import *  # noqa

async def test_smoke(site):
    b = await site.browser()
    for path in ["/", "/docs", "/docs/index", "/signin", "/static/portal.css"]:
        p = await b.get(path)
        print(path, p.status, len(p.text))
        assert p.status == 200, p.text[:3000]
    await site.person()
    p = await b.sign_in("ayse@example.com")
    print(p.status, p.url)
    assert p.status == 200, p.text[:3000]
    for path in ["/account", "/chat", "/account/connect?model=m", "/account/password"]:
        p = await b.get(path)
        print(path, p.status)
        assert p.status == 200, p.text[:3000]
