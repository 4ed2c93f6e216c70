using System.Net;
using System.Net.Http.Headers;
using System.Text;
using Microsoft.Playwright;
using Xunit.Abstractions;

namespace Allocator.Host.Tests.Browser;

/// <summary>
/// Orleans' dashboard on a three-instance cluster started the documented way
/// (<c>eng/run.sh --instances 3 --orleans-dashboard</c>), opened in a
/// browser with the admin key: it lists every silo of the cluster and the pool grain.
/// </summary>
public sealed class OrleansDashboardBrowserTests(ITestOutputHelper output)
{
    [Fact]
    public async Task ThreeInstances_DashboardOnOne_ShowsEverySiloAndThePoolGrain()
    {
        await using var cluster = await RunScript.StartAsync(instances: 3, output, orleansDashboard: true);

        // The demo pool's grain is activated by an allocation (through another instance).
        using (var http = new HttpClient { BaseAddress = cluster.Urls[1], Timeout = TimeSpan.FromSeconds(30) })
        using (var request = new HttpRequestMessage(HttpMethod.Post, "v1/pools/demo/allocations") { Content = System.Net.Http.Json.JsonContent.Create(new { units = 1 }) })
        {
            request.Headers.Add("X-Api-Key", cluster.Key);
            request.Headers.Add("Idempotency-Key", "orleans-dashboard-" + Guid.NewGuid());
            using var response = await http.SendAsync(request);
            response.StatusCode.Should().Be(HttpStatusCode.Created);
        }

        await using var chromium = await Chromium.LaunchAsync();
        var page = await chromium.NewPageAsync(new BrowserNewContextOptions { HttpCredentials = new HttpCredentials { Username = "admin", Password = cluster.Key } });
        var requests = Chromium.RecordRequests(page);
        var dashboard = new Uri(cluster.Urls[0], "orleans/");

        await page.GotoAsync(dashboard.AbsoluteUri + "#/silos");
        foreach (var port in cluster.SiloPorts)
        {
            // A silo is listed by its address, 127.0.0.1:PORT@GENERATION, with its status.
            await page.GetByText($"127.0.0.1:{port}@").First.WaitForAsync(new() { Timeout = 30_000 });
        }

        (await page.Locator("body").InnerTextAsync()).Should().Contain("Active");
        await Chromium.ScreenshotAsync(page, "orleans-dashboard-silos");

        await page.GotoAsync(dashboard.AbsoluteUri + "#/grains");
        await page.GetByText("PoolGrain", new() { Exact = true }).First.WaitForAsync(new() { Timeout = 30_000 });
        await Chromium.ScreenshotAsync(page, "orleans-dashboard-grains");

        requests.Where(u => u.Authority != dashboard.Authority).Should().BeEmpty("the dashboard is served whole by the instance");
    }

    [Fact]
    public async Task Dashboard_AdminOnly_OffUnlessEnabled()
    {
        await using (var off = await TestHost.StartAsync())
        {
            using var response = await off.Http.GetAsync("orleans/");
            response.StatusCode.Should().Be(HttpStatusCode.NotFound, "the dashboard is off unless enabled");
        }

        await using var host = await TestHost.StartAsync(["--Allocator:OrleansDashboard:Enabled=true"]);
        using var anonymous = new HttpClient { BaseAddress = host.BaseAddress };

        using (var response = await anonymous.GetAsync("orleans/"))
        {
            response.StatusCode.Should().Be(HttpStatusCode.Unauthorized);
            response.Headers.WwwAuthenticate.Select(h => h.Scheme).Should().Contain("Basic", "a browser is asked for the key");
        }

        using (var response = await Send(anonymous, TestHost.BrokerKey))
        {
            response.StatusCode.Should().Be(HttpStatusCode.Forbidden, "a broker key does not open the dashboard");
        }

        using (var response = await Send(anonymous, "not-a-key"))
        {
            response.StatusCode.Should().Be(HttpStatusCode.Unauthorized);
        }

        using (var response = await Send(anonymous, TestHost.AdminKey))
        {
            response.StatusCode.Should().Be(HttpStatusCode.OK);
            (await response.Content.ReadAsStringAsync()).Should().Contain("Orleans Dashboard");
        }

        using (var response = await host.Http.GetAsync("orleans/version"))
        {
            response.StatusCode.Should().Be(HttpStatusCode.OK, "the admin key in X-Api-Key opens the dashboard's API too");
        }

        using (var document = await host.Http.GetAsync("openapi/v1.json"))
        {
            (await document.Content.ReadAsStringAsync()).Should().NotContain("/orleans", "the dashboard is not part of the API");
        }

        static Task<HttpResponseMessage> Send(HttpClient http, string password)
        {
            var request = new HttpRequestMessage(HttpMethod.Get, "orleans/");
            request.Headers.Authorization = new AuthenticationHeaderValue("Basic", Convert.ToBase64String(Encoding.UTF8.GetBytes("someone:" + password)));
            return http.SendAsync(request);
        }
    }
}
