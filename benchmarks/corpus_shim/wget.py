"""wget (the PyPI module some PaddleCV scripts import to fetch pretrained weights): present so the
import succeeds; a download is refused (the runner is offline)."""


def download(url, out=None, bar=None):
    raise OSError("offline: the corpus runner downloads nothing (%s)" % url)
